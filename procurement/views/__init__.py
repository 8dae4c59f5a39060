"""HTML pages of the procurement app: orders and deliveries (:mod:`.orders`), RMA cases (:mod:`.rma`),
forecasts, warranty and refresh planning (:mod:`.planning`)."""
