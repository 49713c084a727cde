// The workerd floor for `npm run bench`: a Worker that forwards every request to the bench upstream
// untouched and returns its response as is. What podgate adds beyond this is podgate's own cost;
// this Worker's own overhead over a direct call is the runtime's (HTTP in, fetch out, streams).
export default {
  fetch(request, env) {
    const url = new URL(request.url)
    return fetch(`${env.UPSTREAM}${url.pathname}`, { method: request.method, headers: request.headers, body: request.body })
  },
}
