"""SavedModel export: serving_default (raw features in) and incr_update_sig (updates in)."""
