# Sourced by scripts/start and scripts/test: find or install uv, then the locked environment.
#
# CRONICORN_PYTHON=3.13 (a version, or an interpreter's path) runs on another supported
# Python than the default one in .venv: the same lock installed into its own environment,
# .venv-<version> (e.g. `CRONICORN_PYTHON=3.13 scripts/test --fast`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.local/bin:$PATH"
if ! command -v uv >/dev/null 2>&1; then
  echo "==> installing uv (the package manager that reads uv.lock)"
  # Pinned, as in the Dockerfile: this uv builds the project (pyproject.toml's
  # build-system, uv_build) with the copy built into it, so uv sync downloads no build tool.
  python3 -m pip install --quiet "uv==0.13.9" 2>/dev/null \
    || python3 -m pip install --quiet --user --break-system-packages "uv==0.13.9"
fi
VENV=.venv
PYTHON_CHOICE=()
if [ -n "${CRONICORN_PYTHON:-}" ]; then
  if [ -x "$CRONICORN_PYTHON" ]; then
    interpreter=$CRONICORN_PYTHON
  elif command -v pyenv >/dev/null 2>&1 && pyenv prefix "$CRONICORN_PYTHON" >/dev/null 2>&1; then
    # pyenv's shims answer only for its selected versions, so uv cannot find the others.
    interpreter="$(pyenv prefix "$CRONICORN_PYTHON")/bin/python"
  else
    interpreter=$(uv python find "$CRONICORN_PYTHON") || {
      echo "CRONICORN_PYTHON=$CRONICORN_PYTHON: no such Python here; give a version" \
        "installed on this machine (3.11 to 3.13) or an interpreter's path." >&2
      exit 1
    }
  fi
  VENV=".venv-$("$interpreter" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  PYTHON_CHOICE=(--python "$interpreter")
fi
echo "==> installing locked dependencies into $VENV"
# Compiled once here: where PYTHONDONTWRITEBYTECODE is set (this machine, the Dockerfile)
# nothing else writes .pyc files, and every process the tests start (Celery workers,
# beat, manage.py) compiled Django, Celery and the rest again: ~5 s of CPU per start
# instead of ~2 s, enough for a restarted worker to miss a fault case's recovery window.
UV_PROJECT_ENVIRONMENT=$VENV uv sync --frozen --quiet --compile-bytecode "${PYTHON_CHOICE[@]}"
PY=$VENV/bin/python
