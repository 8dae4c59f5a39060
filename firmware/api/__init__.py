"""Import from the submodules (firmware.api.<module>); nothing is re-exported here."""
