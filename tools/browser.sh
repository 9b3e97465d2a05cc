#!/usr/bin/env bash
# Debian's Chromium and its chromedriver for the page's browser test (crates/codon-serve/tests/
# browser.rs), installed from Debian's packages when missing; never a download at test time.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium chromium-driver >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
