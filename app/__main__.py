"""`python -m app`: the command line (see app.cli)."""

from __future__ import annotations

import sys

from app.cli import main

sys.exit(main())
