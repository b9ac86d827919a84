# One image per binary: docker build --build-arg PILLAR=<pillar> -t kagenti-<pillar> .
# A binary that lives in another pillar's module names itself too: kagenti-authbridge, the
# tokenexchange data plane, is --build-arg PILLAR=tokenexchange --build-arg BINARY=kagenti-authbridge;
# the AgentCard federation's member agent alone, --build-arg PILLAR=agentcard
# --build-arg BINARY=kagenti-agentcard-federation-member.
# Build tags: hack/go-build-tags (grpcnotrace keeps gRPC's debug pages, and with them html/template,
# out of the binaries: reflection on templates stops the linker from dropping unused methods).
# Static binary on a distroless base, running as the distroless nonroot user (65532) unless the pod
# says otherwise (the identity containers set their own UIDs).
FROM golang:1.26 AS build
ARG PILLAR
ARG BINARY=kagenti-${PILLAR}
ARG VERSION=dev
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 go build -tags "$(cat hack/go-build-tags)" -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/manager ./${PILLAR}/cmd/${BINARY}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
