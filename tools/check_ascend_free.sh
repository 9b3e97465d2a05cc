#!/usr/bin/env bash
# The crates that run on any device build no Ascend code: candle-ascend (and the emulated CANN
# toolkit it compiles) is absent from their normal dependencies, and codon-ops and codon-model
# build without it when their `ascend` feature is off.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
check() {
    local what="$1"
    shift
    if cargo tree --quiet -e normal --prefix none "$@" | grep -q '^candle-ascend '; then
        echo "candle-ascend is in $what"
        status=1
    fi
}
for crate in codon-files codon-vocab codon-data codon-train codon-eval codon-design; do
    check "$crate's dependencies" -p "$crate"
done
check "codon-ops without its ascend feature" -p codon-ops --no-default-features
check "codon-model without its ascend feature" -p codon-model --no-default-features --features training,hub
cargo check --quiet -p codon-ops --no-default-features
echo "ascend-free crates: $([ $status = 0 ] && echo 'none depends on candle-ascend' || echo 'see above')"
exit $status
