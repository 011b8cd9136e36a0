import sys
from pathlib import Path

# The engine's test helpers live beside its unit tests (no packages under tests/).
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "unit" / "core" / "log"))
