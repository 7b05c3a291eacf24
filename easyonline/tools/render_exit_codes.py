"""Renders the exit-code table (``easyonline/core/exit_codes.py``) into docs/operations.md.

    python -m easyonline.tools.render_exit_codes           # prints the block
    python -m easyonline.tools.render_exit_codes --write   # rewrites it between the markers
    python -m easyonline.tools.render_exit_codes --check   # exits 1 when the docs differ

The table lives in the code so that ``--help`` and the docs cannot disagree;
edit it there and run ``--write``. No TensorFlow is imported.
"""
import argparse
import os
import sys

from easyonline.core.exit_codes import DOCS_BEGIN, DOCS_END, render_markdown

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                    "operations.md")


def replace_block(text: str, block: str) -> str:
    """``text`` with the block between (and including) the markers replaced by ``block``."""
    begin, end = text.find(DOCS_BEGIN), text.find(DOCS_END)
    if begin < 0 or end < begin:
        raise ValueError(f"the markers are missing: put {DOCS_BEGIN!r} and {DOCS_END!r} where the table goes")
    return text[:begin] + block + text[end + len(DOCS_END):]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the block in --docs")
    parser.add_argument("--check", action="store_true", help="exit 1 when the block in --docs differs")
    parser.add_argument("--docs", default=DOCS, help="the markdown file holding the markers")
    args = parser.parse_args(argv)
    block = render_markdown()
    if not (args.write or args.check):
        print(block)
        return 0
    with open(args.docs, encoding="utf-8") as f:
        text = f.read()
    wanted = replace_block(text, block)
    if args.check:
        if wanted != text:
            print(f"{args.docs}: the exit codes differ from easyonline/core/exit_codes.py; run "
                  "python -m easyonline.tools.render_exit_codes --write", file=sys.stderr)
            return 1
        return 0
    if wanted != text:
        with open(args.docs, "w", encoding="utf-8") as f:
            f.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
