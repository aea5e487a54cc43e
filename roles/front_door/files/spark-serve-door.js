// roles/front_door: the presented bearer key's SHA-256 (hex), or '' without one. The door's map compares this
// digest with each tenant's, never the key's own bytes: what a compare's time could tell is about a digest the
// caller cannot steer, and the door's files hold digests, never a key.
var crypto = require('crypto');

function key_sha256(r) {
    var header = r.headersIn.Authorization || '';
    if (header.slice(0, 7) !== 'Bearer ') {
        return '';
    }
    return crypto.createHash('sha256').update(header.slice(7).trim()).digest('hex');
}

export default {key_sha256};
