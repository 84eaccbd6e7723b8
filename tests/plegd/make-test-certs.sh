#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# make-test-certs.sh DIR: the certificates of plegd's TLS tests (test-plegd-security.c), made with
# openssl in DIR at test time (nothing is kept in the tree, nothing expires in it):
#   ca.pem ca.key           the CA of --client-ca-file and of the server's certificates
#   other-ca.pem            another CA
#   both-cas.pem            ca.pem and other-ca.pem in one file (a CA file two CAs trust)
#   server.pem server.key   127.0.0.1 and localhost, signed by ca
#   server2.pem server2.key the same names, another key and serial (a rotation)
#   client.pem client.key   CN=consumer, signed by ca (clientAuth)
#   other-client.pem .key   CN=intruder, signed by other-ca
#   expired.pem .key        CN=expired, signed by ca, valid in 2020 only
#   future.pem .key         CN=future, signed by ca, valid from 2099
# Keys are EC P-256, mode 0600.

set -euo pipefail

dir=$1
cd "$dir"
umask 077

cat >ca.cnf <<EOF
[ ca ]
default_ca = test_ca
[ test_ca ]
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[ any ]
commonName = supplied
[ server ]
basicConstraints = CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[ client ]
basicConstraints = CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = clientAuth
EOF
: >index.txt
mkdir -p issued
echo 1000 >serial

key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null
}

# ca NAME CN: a self-signed CA
ca() {
    key "$1"
    openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 3650 -sha256 \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$1.pem"
}

# sign NAME CN CA EXTENSIONS [START END]: a certificate for a new key, signed by CA
sign() {
    local name=$1 cn=$2 issuer=$3 ext=$4
    shift 4
    local dates=(-days 365)
    [ $# -eq 2 ] && dates=(-startdate "$1" -enddate "$2")
    key "$name"
    openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr"
    openssl ca -batch -notext -config ca.cnf -cert "$issuer.pem" -keyfile "$issuer.key" \
        -extensions "$ext" "${dates[@]}" -in "$name.csr" -out "$name.pem" 2>/dev/null
    rm -f "$name.csr"
}

ca ca "plegd test CA"
ca other-ca "another CA"
cat ca.pem other-ca.pem >both-cas.pem
sign server 127.0.0.1 ca server
sign server2 127.0.0.1 ca server
sign client consumer ca client
sign other-client intruder other-ca client
sign expired expired ca client 20200101000000Z 20200102000000Z
sign future future ca client 20990101000000Z 21000101000000Z
chmod 0644 ./*.pem
