"""``python -m klock demo [options]`` runs the demo."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv and argv[0] == "demo":
        from .demo import main as demo

        return demo(argv[1:])
    print(
        "usage: python -m klock demo [--agents N] [--edits N] [--files N] [--policy P]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
