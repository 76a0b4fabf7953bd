// A real OpenID Connect provider for the console's sign-in tests: npm's
// oidc-provider (8.x, OpenID Certified), run by the testkit with Node.js
// (services/testkit/src/oidc_provider.rs). Configured by the JSON in
// JETCRON_OIDC_TEST:
//   {port, issuer, client_id, client_secret, redirect_uri, kids, accounts}
// `kids` names the signing keys (RSA 2048, made at start; the first signs),
// `accounts` maps a login to its groups. Any password signs in (the
// provider's development login form); consent is given once for all.
//
// GET /test/mode?set=<mode> changes what the token endpoint answers, to
// test the relying party's checks against a real provider's tokens:
//   normal       the provider's ID token
//   tamper       its payload changed (groups), the signature kept
//   expired      expired 10 minutes ago, signed again with the real key
//   other_key    signed again with another key under the same key id
//   unknown_kid  signed again with another key under a new key id
import Provider from 'oidc-provider';
import { generateKeyPairSync, sign } from 'node:crypto';

const c = JSON.parse(process.env.JETCRON_OIDC_TEST);
let mode = 'normal';

const rsaKey = (kid) => {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { kid, privateKey, jwk: { ...privateKey.export({ format: 'jwk' }), kid, use: 'sig', alg: 'RS256' } };
};
const keys = c.kids.map(rsaKey);

const b64url = (data) => Buffer.from(data).toString('base64url');
const decode = (part) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
const signed = (header, payload, key) => {
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
  return `${input}.${sign('sha256', Buffer.from(input), key.privateKey).toString('base64url')}`;
};

const altered = (token) => {
  const [h, p, s] = token.split('.');
  const header = decode(h);
  const payload = decode(p);
  const now = Math.floor(Date.now() / 1000);
  switch (mode) {
    case 'tamper':
      return `${h}.${b64url(JSON.stringify({ ...payload, groups: ['admins'] }))}.${s}`;
    case 'expired':
      return signed(header, { ...payload, iat: now - 1200, exp: now - 600 }, keys[0]);
    case 'other_key':
      return signed(header, payload, rsaKey(header.kid));
    case 'unknown_kid': {
      const stranger = rsaKey('unknown-kid');
      return signed({ ...header, kid: stranger.kid }, payload, stranger);
    }
    default:
      return token;
  }
};

const provider = new Provider(c.issuer, {
  clients: [{
    client_id: c.client_id,
    client_secret: c.client_secret,
    redirect_uris: [c.redirect_uri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  jwks: { keys: keys.map((k) => k.jwk) },
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({
      sub: id,
      email: `${id}@corp.example`,
      email_verified: true,
      groups: c.accounts[id] ?? [],
    }),
  }),
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  scopes: ['openid', 'email', 'groups'],
  // Scope claims in the ID token itself (the default keeps them for userinfo).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['jetcron-test-cookie-key'] },
  // Consent given once for all: the tests are about the relying party.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email groups');
    await grant.save();
    return grant;
  },
});

provider.use(async (ctx, next) => {
  if (ctx.path === '/test/mode') {
    mode = String(ctx.query.set ?? 'normal');
    ctx.body = `mode ${mode}\n`;
    return;
  }
  await next();
  if (ctx.oidc?.route === 'token' && ctx.body?.id_token) {
    ctx.body = { ...ctx.body, id_token: altered(ctx.body.id_token) };
  }
});

// Only this machine: its login takes any password.
provider.listen(c.port, '127.0.0.1', () => console.log('listening'));
