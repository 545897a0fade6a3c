"""Store recovery (the one linear procedure that makes a store consistent at open) and retention."""
