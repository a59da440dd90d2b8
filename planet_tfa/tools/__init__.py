"""Tools for users and maintainers, one entry point each (`python -m planet_tfa.tools.NAME`)."""
