#!/bin/sh
# web: migrate, then serve with gunicorn. worker: a Celery worker on $CELERY_QUEUES, or on
# every queue that harness_app/queues.py declares when it is unset.
set -eu
case "${1:-web}" in
  web)
    python manage.py migrate --no-input
    # gthread: a streamed proxy call holds its thread for the whole reply, and request
    # threads that live on keep their database connections (CONN_MAX_AGE).
    exec gunicorn config.wsgi:application --bind 0.0.0.0:8000 \
      --workers "${WEB_CONCURRENCY:-3}" --worker-class gthread --threads "${WEB_THREADS:-8}" \
      --timeout 120 --access-logfile - --logger-class config.logs.RedactingLogger
    ;;
  worker)
    exec celery -A config worker --loglevel=INFO \
      --queues="${CELERY_QUEUES:-$(python -m harness_app.queues)}" \
      --pool="${CELERY_POOL:-prefork}" --concurrency="${CELERY_CONCURRENCY:-4}"
    ;;
  *)
    exec "$@"
    ;;
esac
