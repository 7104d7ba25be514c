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
uv sync --frozen --quiet
PY=.venv/bin/python
