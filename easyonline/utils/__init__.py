"""Small shared helpers: file access (local and oss://), time, networking."""
