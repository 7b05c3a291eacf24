"""Dynamic (vocabulary-free) embedding tables on TFRA."""
from easyonline.embedding.dynamic_tables import DynamicTables
