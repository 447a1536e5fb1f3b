#!/usr/bin/env bash
# Builds the plugins that prove the Backend API's version rule across compilers, with Debian's
# Rust (rustc-web/cargo-web: /usr/bin/rustc, another version and build than the rustup toolchain
# that builds the host):
#   tests/compat          the frozen Backend API 1.0 and plugins built against it
#   tests/compat-1.1      the frozen Backend API 1.1 and a plugin built against it
#   tests/compat-1.2      the frozen Backend API 1.2 and a plugin built against it
#   tests/compat-1.3      the frozen Backend API 1.3 and a plugin built against it
#   tests/compat-1.4      the frozen Backend API 1.4, its kit, and a plugin built against both
# Each is its own workspace with its own lock file; outputs go to compat/, compat-1.1/,
# compat-1.2/, compat-1.3/ and compat-1.4/ in $CARGO_TARGET_DIR (or target/), where tests/integration looks
# for them.
# Installs rustc-web and cargo-web when missing (needs root and Debian's package registry).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${CARGO_TARGET_DIR:-target}"

if [ ! -x /usr/bin/rustc ] || [ ! -x /usr/bin/cargo ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "compat: Debian's rustc-web and cargo-web are missing and installing them needs root" >&2
    exit 1
  fi
  echo "compat: installing Debian's rustc-web and cargo-web" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq rustc-web cargo-web >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq rustc-web cargo-web >/dev/null; }
fi

host_rustc=$(rustc --version)
debian_rustc=$(/usr/bin/rustc --version)
echo "compat: host compiler:   $host_rustc"
echo "compat: plugin compiler: $debian_rustc"
if [ "$host_rustc" = "$debian_rustc" ]; then
  echo "compat: /usr/bin/rustc is the host's own compiler; the test needs another one" >&2
  exit 1
fi

build() {
  # Nothing of rustup's environment may reach Debian's cargo.
  env -u RUSTUP_TOOLCHAIN -u RUSTUP_HOME -u CARGO -u RUSTC_WRAPPER -u RUSTFLAGS \
    RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc \
    /usr/bin/cargo build --locked --quiet --manifest-path "tests/$1/Cargo.toml" --target-dir "$build_dir/$1"
}
build compat
build compat-1.1
build compat-1.2
build compat-1.3
build compat-1.4
