import sys
from pathlib import Path

# The log engine's test helpers (a read_committed reader's view) live beside its unit tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "log"))
