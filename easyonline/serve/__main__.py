"""Entry point of ``python -m easyonline.serve``; see easyonline/serve/cli.py."""
from easyonline.serve.cli import run

if __name__ == "__main__":
    run()
