"""Conversations several test modules replay: a staging compose file pasted early in a session
and the exchanges that follow it, and a larger compose file with its billing block deep inside.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

# --- a session about the shop's staging stack (the running summary) ----------------------------

COMPOSE = """\
# docker-compose.staging.yml for the shop stack
version: "3.9"

x-defaults: &defaults
  restart: unless-stopped
  logging:
    driver: json-file
    options:
      max-size: "10m"
      max-file: "3"
  networks: [backend]

services:
  gateway:
    <<: *defaults
    image: shop/gateway:4.1.0
    ports: ["8080:8080"]
    environment:
      UPSTREAM_TIMEOUT_MS: "3000"
      RATE_LIMIT_PER_MINUTE: "600"
    depends_on: [auth, catalog, cart]
    healthcheck:
      test: ["CMD", "curl", "-fsS", "http://localhost:8080/healthz"]
      interval: 15s

  auth:
    <<: *defaults
    image: shop/auth:2.7.3
    ports: ["8090:8090"]
    environment:
      SESSION_TTL_HOURS: "12"
      ISSUER: "https://auth.staging.shop.internal"
    depends_on: [postgres, redis]

  catalog:
    <<: *defaults
    image: shop/catalog:3.2.1
    ports: ["8095:8095"]
    environment:
      SEARCH_BACKEND: "opensearch"
      CACHE_SECONDS: "120"
    depends_on: [postgres, search]

  cart:
    <<: *defaults
    image: shop/cart:1.9.0
    ports: ["8097:8097"]
    environment:
      CART_EXPIRY_DAYS: "14"
    depends_on: [redis]

  billing:
    <<: *defaults
    image: shop/billing:2.3.4
    ports: ["8101:8101"]
    environment:
      BILLING_PORT: "8101"
      INVOICE_PREFIX: "STG-"
      CURRENCY: "EUR"
      LEDGER_URL: "http://ledger:8103"
    depends_on: [postgres, ledger]
    deploy:
      replicas: 2
      resources:
        limits: {cpus: "1.5", memory: 768M}

  ledger:
    <<: *defaults
    image: shop/ledger:0.9.8
    ports: ["8103:8103"]
    environment:
      RETENTION_YEARS: "10"
    depends_on: [postgres]

  notifications:
    <<: *defaults
    image: shop/notifications:1.4.2
    ports: ["8110:8110"]
    environment:
      SMTP_HOST: "mailpit"
      SMTP_PORT: "1025"
      DIGEST_HOUR: "7"
    depends_on: [redis, mailpit]

  worker:
    <<: *defaults
    image: shop/worker:5.0.1
    command: ["celery", "-A", "shop", "worker", "--concurrency=4"]
    environment:
      BROKER_URL: "redis://redis:6379/2"
    depends_on: [redis, postgres]

  scheduler:
    <<: *defaults
    image: shop/scheduler:1.2.0
    environment:
      NIGHTLY_INVOICE_RUN: "02:30"
      TIMEZONE: "Europe/Berlin"
    depends_on: [worker]

  search:
    <<: *defaults
    image: opensearchproject/opensearch:2.15.0
    ports: ["9200:9200"]
    environment:
      discovery.type: "single-node"
      OPENSEARCH_JAVA_OPTS: "-Xms512m -Xmx512m"
    volumes: ["searchdata:/usr/share/opensearch/data"]

  prometheus:
    <<: *defaults
    image: prom/prometheus:v2.53.0
    ports: ["9090:9090"]
    volumes: ["./ops/prometheus.yml:/etc/prometheus/prometheus.yml:ro"]

  grafana:
    <<: *defaults
    image: grafana/grafana:11.1.0
    ports: ["3000:3000"]
    environment:
      GF_AUTH_ANONYMOUS_ENABLED: "true"
    depends_on: [prometheus]

  mailpit:
    <<: *defaults
    image: axllent/mailpit:v1.18
    ports: ["8025:8025"]

  postgres:
    <<: *defaults
    image: postgres:16.4
    ports: ["5432:5432"]
    environment:
      POSTGRES_DB: "shop"
      POSTGRES_USER: "shop"
    volumes: ["pgdata:/var/lib/postgresql/data"]

  redis:
    <<: *defaults
    image: redis:7.2-alpine
    ports: ["6379:6379"]
    command: ["redis-server", "--appendonly", "yes"]

networks:
  backend: {}

volumes:
  pgdata: {}
  searchdata: {}
"""

PASTE = "Here is our staging compose file, keep it around for later:\n\n" + COMPOSE
PASTE_REPLY = (
    "Got it: fourteen services on one backend network. The gateway fronts auth, catalog and "
    "cart; the shop's own services run two to five minor versions apart, and postgres 16.4 "
    "and redis 7.2 are shared by most of them."
)

#: Five more exchanges after the paste: a decision, a preference, a reminder, two longer answers.
FOLLOW_UPS: list[tuple[str, str]] = [
    (
        "We decided to put the staging gateway behind Traefik next sprint. Keep that in mind when "
        "we talk about routing.",
        "Noted: from next sprint Traefik terminates TLS in front of the gateway, so routing rules move "
        "out of the gateway's own config into Traefik labels. Health checks can stay where they are.",
    ),
    (
        "When you cite configuration, I prefer the exact file path and line, not a paraphrase.",
        "Understood. I will quote the path and line of any setting I rely on, and say so plainly when "
        "I am working from memory of this conversation rather than from a file.",
    ),
    (
        "Remind me to double-check the postgres volume backup before Friday.",
        "Will do. Before Friday: confirm that last night's snapshot of the pgdata volume exists, restore "
        "it into a scratch container, and check that the row counts of the main tables match.",
    ),
    (
        "How should we size the worker concurrency for the nightly invoice run?",
        "Start from the work, not the machine. The nightly run is mostly waiting on postgres and on "
        "the ledger, so it is I/O bound: a concurrency of two to four times the CPU count is usual for "
        "that kind of celery worker. Measure one night at the current setting with the task timings "
        "in the worker log: if most time is spent waiting and the database's connection count stays "
        "well below its limit, raise the concurrency one step at a time. Watch three things while you "
        "do: the run's total duration, postgres connections (each worker process holds one), and "
        "memory per process, since invoices are rendered in memory before they are stored. If the "
        "duration stops improving, the database has become the limit and more workers only add "
        "contention. A separate queue for the invoice tasks also keeps them from starving the "
        "ordinary background jobs during the run, and lets you scale the two independently.",
    ),
    (
        "What is a sane retention policy for the notification logs?",
        "Keep what you need to answer a customer and to debug a failed send, and no more. A common "
        "split: delivery events (queued, sent, bounced) for 90 days, which covers most disputes and "
        "a full quarter of trends; message bodies for 14 days at most, because they hold personal "
        "data and are rarely needed after a resend; aggregated counts per day kept indefinitely, since "
        "they are small and anonymous. Make the periods settings rather than constants, document them "
        "in the privacy notice, and run the clean-up as a scheduled job that logs how many rows it "
        "removed, so a silent failure shows up as a growing table rather than as a surprise in a "
        "year. If legal needs longer retention for some category, give that category its own table.",
    ),
]

BILLING_QUESTION = "Which port did the billing service use in the compose file I pasted earlier?"
BILLING_ANSWER = 'The compose file you pasted maps billing to port 8101: "8101:8101" (message #1).'


# --- a larger paste (conversation_history's search) ----------------------------------------------


def compose_paste() -> str:
    """A ~9,000-character compose file whose billing block sits deep inside it."""
    lines = ["Here is the compose file for staging, please keep it in mind.", "services:"]
    for i in range(110):
        lines += [
            f"  svc{i}:",
            f"    image: registry.local/svc{i}:1.{i}",
            "    ports:",
            f'      - "{8000 + i}:{8000 + i}"',
        ]
        if i == 80:
            lines += [
                "  billing:",
                "    image: registry.local/billing:2.1",
                "    ports:",
                '      - "8101:8101"',
                "    environment:",
                "      INVOICE_QUEUE: invoices-eu",
            ]
    return "\n".join(lines)
