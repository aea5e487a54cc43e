// roles/front_door: what the door's nginx asks of a request's Authorization header. The door's maps compare the
// presented key's SHA-256 digest with each tenant's, never the key's own bytes: what a compare's time could tell is
// about a digest the caller cannot steer, and the door's files hold digests, never a key.
var crypto = require('crypto');

function key_sha256(r) {
    var header = r.headersIn.Authorization || '';
    if (header.slice(0, 7) !== 'Bearer ') {
        return '';
    }
    return crypto.createHash('sha256').update(header.slice(7).trim()).digest('hex');
}

// A router's admin API: '401' without a known credential; '403' for a url the credential may not name (a replica
// head's covers its own URL only) or one that is not https://, and for a change without a url; else 'ok'.
function admin_verdict(r) {
    var scope = r.variables.spark_serve_admin_scope;
    if (!scope) {
        return '401';
    }
    var url = r.args.url;
    if (url === undefined) {
        return r.method === 'GET' ? 'ok' : '403';
    }
    if (typeof url !== 'string') {
        return '403';
    }
    try {
        url = decodeURIComponent(url);
    } catch (e) {
        return '403';
    }
    if (url.slice(0, 8) !== 'https://') {
        return '403';
    }
    return scope === '*' || scope === url ? 'ok' : '403';
}

export default {key_sha256, admin_verdict};
