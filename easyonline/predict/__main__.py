"""Entry point of ``python -m easyonline.predict``; see easyonline/predict/cli.py."""
from easyonline.predict.cli import run

if __name__ == "__main__":
    run()
