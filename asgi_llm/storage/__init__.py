"""Files and stores kept between requests: SQLite with its process-safe habits, and the
stores that keep Responses' state. Below the middleware (the usage ledger uses SQLite too).
"""
