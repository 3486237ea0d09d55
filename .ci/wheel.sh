#!/usr/bin/env bash
# The release artefacts, installed as a user installs them: `python -m build` makes the
# sdist and the wheel (`twine check` passes on both, their contents are checked), then the
# BUILT WHEEL (not the checkout) goes into a new virtualenv with its declared extras only
# ([postgres,redis,mcp,otel,encryption]; no dev extra: pytest must not import there), and
# .ci/wheel.py follows the docs in a new `django-admin startproject`: the quickstart's
# settings, the deployment page's PostgreSQL and Celery settings, migrate,
# llmchat_sync_models, the quickstart's offline ask in `manage.py shell`, a Celery worker
# on Redis answering ask_later, and the first example of each extra's page (mcp, otel,
# encryption, postgres), each run twice. Then the install lines of the README and the
# quickstart, as written, each into a new venv (the pip cache reused): the clone (of this
# checkout) with a plain install of it, and the git URL (git+file:// of this checkout),
# with their extras; both install the checkout's last commit.
#
# Run alone:   bash .ci/wheel.sh          (bash .ci/run wheel does the same in CI)
# Environment: WHEEL_PYTHON (the interpreter of the new venv; default python3.11),
# BUILD_PYTHON (the one that runs `build` and `twine`; default .venv/bin/python),
# WHEEL_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/llmchat_wheel: the
# database is dropped and created again), WHEEL_REDIS_URL (default
# redis://127.0.0.1:6379/12: the broker and the events; emptied first).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_PYTHON="${BUILD_PYTHON:-.venv/bin/python}"
WHEEL_PYTHON="${WHEEL_PYTHON:-python3.11}"
export WHEEL_DATABASE_URL="${WHEEL_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/llmchat_wheel}"
export WHEEL_REDIS_URL="${WHEEL_REDIS_URL:-redis://127.0.0.1:6379/12}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

start=$SECONDS
"$BUILD_PYTHON" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || {
  cat "$work/build.log"; exit 1; }
"$BUILD_PYTHON" -m twine check --strict "$work"/dist/*
"$BUILD_PYTHON" .ci/wheel.py contents "$work"/dist/*.whl "$work"/dist/*.tar.gz
echo "-- built and checked in $((SECONDS - start)) s"

"$WHEEL_PYTHON" -m venv "$work/venv"
wheel="$(ls "$work"/dist/*.whl)"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "${wheel}[postgres,redis,mcp,otel,encryption]"
"$work/venv/bin/python" -m pip check
echo "-- installed in $((SECONDS - start)) s"

# the driver runs in the new venv, from outside the checkout (nothing of it on sys.path)
(cd "$work" && "$work/venv/bin/python" "$OLDPWD/.ci/wheel.py" project \
  --docs "$OLDPWD/docs" --project "$work/project")
echo "-- the wheel: passed in $((SECONDS - start)) s"

"$BUILD_PYTHON" .ci/wheel.py installs --checkout . --python "$WHEEL_PYTHON" --work "$work/installs"
echo "-- the wheel step: passed in $((SECONDS - start)) s"
