"""Durable job storage on SQLAlchemy (SQLite embedded; PostgreSQL by URL)."""
