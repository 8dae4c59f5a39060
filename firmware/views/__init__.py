"""Import from the submodules (firmware.views.<module>); nothing is re-exported here."""
