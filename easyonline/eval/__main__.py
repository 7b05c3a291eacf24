"""Entry point of ``python -m easyonline.eval``; see easyonline/eval/cli.py."""
from easyonline.eval.cli import run

if __name__ == "__main__":
    run()
