# Sourced by scripts/start and scripts/test: find or install uv, then the locked environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.local/bin:$PATH"
if ! command -v uv >/dev/null 2>&1; then
  echo "==> installing uv (the package manager that reads uv.lock)"
  python3 -m pip install --quiet uv 2>/dev/null \
    || python3 -m pip install --quiet --user --break-system-packages uv
fi
echo "==> installing locked dependencies into .venv"
# Compiled once here: where PYTHONDONTWRITEBYTECODE is set (this machine, the Dockerfile)
# nothing else writes .pyc files, and every process the tests start (Celery workers,
# beat, manage.py) compiled Django, Celery and the rest again: ~5 s of CPU per start
# instead of ~2 s, enough for a restarted worker to miss a fault case's recovery window.
uv sync --frozen --quiet --compile-bytecode
PY=.venv/bin/python
