#!/usr/bin/env bash
# mypy over the package as it is installed: setup.py maps router/, storage/ and evals/ onto
# memabra.router, memabra.storage and memabra.evals, which an editable install hides from mypy.
# A tree of symlinks under build/typecheck/ lays the sources out as installed (always current,
# nothing copied), and mypy checks it with pyproject.toml's [tool.mypy] settings.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
tree="build/typecheck"
rm -rf "$tree"
mkdir -p "$tree/memabra"
for entry in memabra/*; do
    [[ "$(basename "$entry")" == __pycache__ ]] && continue
    ln -s "$root/$entry" "$tree/memabra/$(basename "$entry")"
done
for sub in router storage evals; do
    ln -s "$root/$sub" "$tree/memabra/$sub"
done
mypy="${MYPY:-$root/.venv/bin/mypy}"
cd "$tree"
exec "$mypy" --config-file "$root/pyproject.toml" --cache-dir "$root/build/mypy_cache" -p memabra "$@"
