# One image for every process: web (gunicorn), celery beat, the workers, mcp, migrate, demo.
# Two stages: "build" installs everything from uv.lock (uv, compilers of bytecode, the
# project's console script) and collects the static files; the final stage is the slim
# Python image with only that environment and the code, run as a non-root user. Nothing is
# downloaded at run time.
FROM python:3.11-slim AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_PYTHON_DOWNLOADS=never \
    PATH=/opt/venv/bin:$PATH

# uv from PyPI, pinned, so the build needs only the Python package index.
RUN pip install --no-cache-dir "uv==0.13.9"

WORKDIR /app

# Dependencies first: this layer is rebuilt only when the lock file changes.
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project

COPY . .
# The project itself, editable (its path is /app in both stages): the `cronicorn` console
# script lands in /opt/venv/bin and the code is imported from /app.
RUN uv sync --frozen --no-dev

# Static files (the admin's) are collected into var/static and served by WhiteNoise.
# The key exists only for this command; the real one comes from the environment.
RUN DEBUG=false DJANGO_SECRET_KEY=collectstatic-only-not-a-secret \
        python manage.py collectstatic --noinput -v0 \
    && mkdir -p var/metrics


FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH

RUN useradd --system --uid 10001 --no-create-home --home-dir /app cronicorn

WORKDIR /app
COPY --from=build /opt/venv /opt/venv
# The code read-only to the user it runs as; only var/ (beat's schedule, the metrics
# files) is its to write.
COPY --from=build /app /app
RUN chown -R cronicorn:cronicorn /app/var

USER cronicorn

# Production defaults; every other setting comes from the environment (.env.example).
# The metrics directory is a volume shared by web and workers (docker-compose.yml).
ENV DEBUG=false \
    PORT=8000 \
    PROMETHEUS_MULTIPROC_DIR=/app/var/metrics

EXPOSE 8000
CMD ["gunicorn", "-c", "cronicorn_site/gunicorn.conf.py", "cronicorn_site.wsgi"]
