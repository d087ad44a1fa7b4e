#!/usr/bin/env bash
# Prints the package extra the configured DATABASE_URL's driver needs (environment, else the
# last DATABASE_URL line of .env in the current directory): `mysql` for mysql+pymysql:// (and
# mariadb), `sqlserver` for mssql+pyodbc://; nothing for SQLite and PostgreSQL (built in).
set -euo pipefail
url="${DATABASE_URL:-}"
if [ -z "$url" ] && [ -f .env ]; then
  url="$(sed -n 's/^[[:space:]]*DATABASE_URL[[:space:]]*=[[:space:]]*//p' .env | tail -n 1 | tr -d "\"'")"
fi
case "$url" in
  mysql* | mariadb*) echo "mysql" ;;
  mssql*) echo "sqlserver" ;;
  *) echo "" ;;
esac
