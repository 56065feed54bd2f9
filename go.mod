module natsdelay

go 1.26.0

require github.com/cespare/xxhash/v2 v2.3.0

require google.golang.org/protobuf v1.36.12 // indirect
