"""What several tests share and no bench needs (benches import only the installed easyonline package)."""
