// Sample hostile function: runs code hidden in a base64 blob.
const p =
  "cHJpbnQoInRoaXMgYmxvYiBzdGFuZHMgaW4gZm9yIGEgaGlkZGVuIHBheWxvYWQiKQpwcmludCgidGhpcyBibG9iIHN0YW5kcyBpbiBmb3IgYSBoaWRkZW4gcGF5bG9hZCIpCnByaW50KCJ0aGlzIGJsb2Igc3RhbmRzIGluIGZvciBhIGhpZGRlbiBwYXlsb2FkIikKcHJpbnQoInRoaXMgYmxvYiBzdGFuZHMgaW4gZm9yIGEgaGlkZGVuIHBheWxvYWQiKQpwcmludCgidGhpcyBibG9iIHN0YW5kcyBpbiBmb3IgYSBoaWRkZW4gcGF5bG9hZCIpCnByaW50KCJ0aGlzIGJsb2Igc3RhbmRzIGluIGZvciBhIGhpZGRlbiBwYXlsb2FkIikK";

exports.handle = async () => {
  return eval(Buffer.from(p, "base64").toString("utf8"));
};
