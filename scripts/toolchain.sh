#!/usr/bin/env bash
# Sourced by the other scripts. rust-toolchain.toml pins 1.95.0; a fresh machine has that
# release installed as rustup's "stable" (no toolchain can be downloaded), so link the name
# to it when the pinned name is missing.
pinned=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../rust-toolchain.toml")
if command -v rustup >/dev/null 2>&1 && ! rustup toolchain list | grep -q "^${pinned}-"; then
  stable_version=$(rustc +stable --version 2>/dev/null | awk '{print $2}')
  if [ "$stable_version" = "$pinned" ]; then
    rustup toolchain link "$pinned" "$(rustc +stable --print sysroot)"
  else
    echo "rust-toolchain.toml pins $pinned but stable is ${stable_version:-missing}" >&2
  fi
fi

# Where cargo puts what it builds: $CARGO_TARGET_DIR when set (a target directory shared
# between checkouts), else target/. What the scripts fetch or make themselves (models, the
# Python venv, test data, reports) stays in this checkout's target/ either way.
build_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p target
