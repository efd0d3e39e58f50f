"""Shared backends: Redis for minute windows, concurrency leases and budget counters, PostgreSQL
for keys, the usage ledger, budgets and stored Responses, so that several processes (uvicorn
workers, pods behind a load balancer) hold one set of limits and one state. Optional: each
module imports its client (`redis`, `psycopg`) and is imported only when settings name it.
"""
