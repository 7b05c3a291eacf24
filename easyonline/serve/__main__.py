"""Entry point of ``python -m easyonline.serve``; see easyonline/jobs/serve_cli.py."""
from easyonline.jobs.serve_cli import run

if __name__ == "__main__":
    run()
