#!/usr/bin/env bash
# Prints the environment that cross-builds for aarch64 (Kunpeng) and runs the result under
# qemu-user: `eval "$(tools/aarch64-toolchain.sh)"`. Installs what is missing first: Debian's
# aarch64 gcc and libc (the linker, and the compiler of the C emulator), qemu-user, and rustup's
# standard library for the target.
set -euo pipefail
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu >&2
echo "export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc"
echo "export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc"
echo "export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER='qemu-aarch64 -L /usr/aarch64-linux-gnu'"
