"""Entry point of ``python -m easyonline.predict``; see easyonline/jobs/predict_cli.py."""
from easyonline.jobs.predict_cli import run

if __name__ == "__main__":
    run()
