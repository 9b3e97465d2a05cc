"""CodonData helpers against upstream's results and exceptions (upstream/predictions.json)."""

import pytest

from codon_ascend import CodonData


def test_codon_data_helpers_match_upstream(upstream_predictions):
    checked = 0
    for name, cases in upstream_predictions["codon_data"].items():
        function = getattr(CodonData, name)
        for case in cases:
            what = f"{name}({case['args']})"
            if "error" in case:
                with pytest.raises(Exception) as raised:
                    function(**case["args"])
                assert type(raised.value).__name__ == case["error"]["type"], what
                assert str(raised.value).startswith(case["error"]["message"].rstrip(".")), f"{what}: {raised.value}"
            else:
                result = function(**case["args"])
                assert (list(result) if isinstance(result, tuple) else result) == case["result"], what
            checked += 1
    assert checked == 29, checked
