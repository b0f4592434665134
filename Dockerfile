# ferry's container image: the static ferry binary, CA certificates and a
# non-root user on an empty base (no shell, no package manager). The
# entrypoint is ferry, so a container's args are a ferry command:
#   args: [restore, --to, /ckpt, --allow-empty]   (deploy/kubernetes)
#
# Two ways to get the binary:
#
#   from source (the default target): compiles in a golang stage, so the
#   builder pulls the golang image:
#       docker build -t ferry .
#   prebuilt (--target prebuilt-image): no base image at all; the binary and
#   the CA bundle come from the build context as `make image` lays it out in
#   dist/image/ (ferry-linux-<arch>, ca-certificates.crt, LICENSE, NOTICE);
#   works offline:
#       make image     # buildah, podman or docker
#
# The two images differ only in where the binary was built.

ARG GO_IMAGE=docker.io/library/golang:1.26.10-bookworm

# --- source: build ferry from this repository -----------------------------
FROM ${GO_IMAGE} AS source
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
# Empty TARGETOS/TARGETARCH (a builder that sets neither) build for the host.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
        -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
        -o /out/usr/local/bin/ferry ./cmd/ferry && \
    mkdir -p /out/etc/ssl/certs /out/usr/share/doc/ferry && \
    cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ && \
    cp LICENSE NOTICE /out/usr/share/doc/ferry/

# --- prebuilt: a binary from `make release` (see make image) --------------
FROM scratch AS prebuilt
ARG TARGETARCH
COPY ferry-linux-${TARGETARCH} /out/usr/local/bin/ferry
COPY ca-certificates.crt /out/etc/ssl/certs/ca-certificates.crt
COPY LICENSE NOTICE /out/usr/share/doc/ferry/

# --- the image ---------------------------------------------------------------
# Both images below are this: an empty base, a non-root user and ferry as
# the entrypoint. 65532 is the conventional "nonroot" of distroless images;
# Kubernetes may run it as any UID (runAsUser). ferry needs no home
# directory (set FERRY_STATE_DIR for the agent).
FROM scratch AS runtime
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ferry"]
CMD ["--help"]
LABEL org.opencontainers.image.title="ferry" \
      org.opencontainers.image.description="make ML training checkpoints durable in S3-compatible storage and restore them anywhere" \
      org.opencontainers.image.source="https://github.com/ferrylabs/ferry"

# make image: --target prebuilt-image
FROM runtime AS prebuilt-image
COPY --from=prebuilt /out/ /

# The default target: built from source.
FROM runtime
COPY --from=source /out/ /
