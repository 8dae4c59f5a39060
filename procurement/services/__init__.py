"""Every write of the procurement app: orders and deliveries (:mod:`.orders`), failures and RMA cases
(:mod:`.rma`), the history import (:mod:`.history`), forecasts and backtests (:mod:`.forecast`)."""
