# Multi-stage build: a static tock binary (pure-Go SQLite, no cgo) on a small base image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/tockd/tock/app.Version=${VERSION}" -o /out/tock ./cmd/tock

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tock /usr/local/bin/tock
ENV TOCK_HTTP_ADDR=0.0.0.0:8080 TOCK_DATA_DIR=/data
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tock"]
CMD ["serve"]
