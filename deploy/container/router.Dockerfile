# The router's image: Debian's own HAProxy, nothing added (no Lua, no scripts); its
# configuration comes from the ConfigMap kgw-router. Not built in CI; see docs/scale-out.md.
#   docker build -f deploy/container/router.Dockerfile -t kgw-router:0.1.0 .
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends haproxy \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd -g 10001 router && useradd -u 10001 -g 10001 -M -s /usr/sbin/nologin router
USER 10001:10001
# Kubernetes stops a container with the image's stop signal: HAProxy's soft stop (no new
# connections; open websockets go on until hard-stop-after) instead of SIGTERM's hard stop
STOPSIGNAL SIGUSR1
EXPOSE 8080 8404
ENTRYPOINT ["/usr/sbin/haproxy"]
CMD ["-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
