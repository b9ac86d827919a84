# One image per binary: docker build --build-arg PILLAR=<pillar> -t kagenti-<pillar> .
# Static binary on a distroless base, running as the distroless nonroot user (65532).
FROM golang:1.26 AS build
ARG PILLAR
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/manager ./${PILLAR}/cmd/kagenti-${PILLAR}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
