"""``python -m app.cli``: the ``logbus`` command."""

from app.cli import main

raise SystemExit(main())
