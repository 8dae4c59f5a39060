"""Import from the submodules (firmware.services.<module>); nothing is re-exported here."""
