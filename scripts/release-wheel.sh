# Sourced by the benchmarks that run backplane through its Python package (bench-ocr.sh,
# bench-apps.sh): builds CpuFast and the Python wheel in release mode, installs the wheel
# into the project's venv in place of whatever backplane wheel was there
# (scripts/test-python.sh installs its dev build again), and sets `plugins` to a temporary
# directory (removed at exit) holding CpuFast under its installed name. Needs `root`, `py`
# and `venv` (scripts/py-venv.sh); honours CARGO_TARGET_DIR.
cargo build --release --quiet -p acme-cpufast
release="${CARGO_TARGET_DIR:-$root/target}/release"
wheels="$root/target/wheels-release"
rm -rf "$wheels"
"$venv/bin/maturin" build --quiet --release -m bindings/python/Cargo.toml -o "$wheels"
wheel=$(ls "$wheels"/backplane-*.whl)
"$py" -m pip install --disable-pip-version-check --quiet --force-reinstall --no-deps "$wheel"
echo "== installed $(basename "$wheel") (release)"

plugins="$(mktemp -d)"
trap 'rm -rf "$plugins"' EXIT
cp "$release/libacme_cpufast.so" "$plugins/Acme_CpuFast_backend.so"
chmod 755 "$plugins" "$plugins/Acme_CpuFast_backend.so"
