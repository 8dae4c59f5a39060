"""Import from the submodules (firmware.selectors.<module>); nothing is re-exported here."""
