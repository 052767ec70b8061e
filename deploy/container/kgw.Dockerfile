# kgw's image for deploy/kubernetes: Debian 12 and kgw's Debian package (.ci/package.sh builds
# it). Not built in CI (no container runtime there); see docs/scale-out.md.
#   docker build -f deploy/container/kgw.Dockerfile -t kgw:0.1.0 /path/with/kgw_0.1.0_amd64.deb
FROM debian:bookworm-slim
COPY kgw_*.deb /tmp/
RUN apt-get update \
    && apt-get install -y --no-install-recommends /tmp/kgw_*.deb python3-ipykernel \
    && rm -rf /var/lib/apt/lists/* /tmp/kgw_*.deb
EXPOSE 8888
ENTRYPOINT ["/usr/bin/kgw"]
