"""The jobs behind the command-line verbs: flags, the trainer's assembly, and each verb's CLI."""
