# Sourced by scripts/serve and scripts/test: a project-local virtualenv with the package installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRAS="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=".venv/.installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
  touch "$stamp"
fi
