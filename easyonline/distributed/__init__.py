"""Parameter-server training: roles from TF_CONFIG, the ps/worker servers, and the chief's trainer."""
