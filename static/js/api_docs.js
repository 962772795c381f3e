// The API docs page (/api/docs/): starts Swagger UI from a static file, so the page needs
// no inline script under the Content-Security-Policy. The schema URL and the CSRF header
// come from #swagger-ui's data attributes, drf-spectacular's SWAGGER_UI_SETTINGS from the
// #swagger-settings JSON.
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  var settings = JSON.parse(document.getElementById("swagger-settings").textContent);
  var csrfHeader = root.getAttribute("data-csrf-header");
  var csrfToken = root.getAttribute("data-csrf-token");

  // "Try it out" with the page's session: writes carry the CSRF token, as a form would.
  function requestInterceptor(request) {
    if (request.method && request.method !== "GET" && request.credentials === "same-origin") {
      request.headers[csrfHeader] = csrfToken;
    }
    return request;
  }

  var options = {
    url: root.getAttribute("data-schema-url"),
    dom_id: "#swagger-ui",
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    requestInterceptor: requestInterceptor,
  };
  Object.keys(settings).forEach(function (key) { options[key] = settings[key]; });
  window.SwaggerUIBundle(options);
})();
