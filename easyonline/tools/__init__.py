"""Command-line tools: the local broker, the synthetic stream producer."""
