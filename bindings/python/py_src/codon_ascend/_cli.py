"""The ``codon`` command that the wheel puts on PATH: the same program as ``cargo install``'s."""

import sys

from codon_ascend import _native


def main() -> None:
    sys.exit(_native.run_cli(["codon", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
