"""Spares forecasting on plain arrays (no Django): demand distributions and stock levels (:mod:`.stock`), the
rate model (:mod:`.engine`), the rolling-origin backtest (:mod:`.backtest`) and synthetic histories with a known
truth (:mod:`.synthetic`)."""
